"""Posed images into tokens as LaCT's view-synthesis model makes them
(lact_nvs/model.py): per pixel the ray origin, the ray direction, their cross
product (the Plücker moment) and the image scaled to [-1, 1], 12 channels;
target views carry the 9 pose channels and zeros where the image would be.
Each view is cut into patch x patch squares, one token per square of
patch * patch * 12 values, views one after another, squares in raster order.
"""

import numpy as np

from scene import rays

CHANNELS = 12


def view_channels(image, fxfycxcy, c2w, size):
    """[size, size, 12] for a view; image None for a target view."""
    o, d = rays(fxfycxcy, c2w, size)
    rgb = np.zeros_like(o) if image is None else image * 2.0 - 1.0
    return np.concatenate([o, d, np.cross(o, d), rgb], axis=-1)


def patchify(x, patch):
    """[V, size, size, C] -> [V * (size/patch)^2, patch * patch * C], squares in
    raster order, (row, column, channel) within a square."""
    v, size, _, c = x.shape
    n = size // patch
    x = x.reshape(v, n, patch, n, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(v * n * n, patch * patch * c)


def unpatchify(tokens, views, size, patch, channels=3):
    """The inverse of patchify: [V * n * n, patch * patch * C] -> [V, size, size, C]."""
    n = size // patch
    x = tokens.reshape(views, n, n, patch, patch, channels).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(views, size, size, channels)


def context_tokens(images, fxfycxcy, c2w, patch):
    """The input views' tokens [V * n * n, patch^2 * 12]."""
    size = images.shape[1]
    views = [view_channels(im, k, c, size) for im, k, c in zip(images, fxfycxcy, c2w)]
    return patchify(np.stack(views), patch).astype(np.float32)


def target_tokens(fxfycxcy, c2w, size, patch):
    """The target views' pose-only tokens [V * n * n, patch^2 * 12]."""
    views = [view_channels(None, k, c, size) for k, c in zip(fxfycxcy, c2w)]
    return patchify(np.stack(views), patch).astype(np.float32)
