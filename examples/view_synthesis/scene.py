"""Small procedural scenes and posed views of them, rendered with numpy.

A scene is a few Lambertian spheres above a checkered floor under one light;
cameras sit on a sphere around the origin and look at it. Cameras follow
the OpenCV convention LaCT's view-synthesis code uses: x right, y down, z
forward; intrinsics (fx, fy, cx, cy) in pixels; c2w maps camera to world.
"""

import numpy as np

FOV_DEGREES = 50.0
CAMERA_RADIUS = 2.6


def random_scene(rng, spheres=3):
    """Centers [S, 3], radii [S], colors [S, 3] in [0, 1]."""
    centers = rng.uniform([-0.7, -0.7, 0.0], [0.7, 0.7, 0.5], size=(spheres, 3))
    radii = rng.uniform(0.2, 0.42, size=spheres)
    centers[:, 2] = radii - 0.35 + rng.uniform(0, 0.3, size=spheres)  # resting near the floor
    colors = rng.uniform(0.15, 1.0, size=(spheres, 3))
    return {"centers": centers, "radii": radii, "colors": colors}


def look_at(eye):
    """c2w [4, 4] of a camera at `eye` looking at the origin, world z up."""
    forward = -eye / np.linalg.norm(eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, down, forward, eye
    return c2w


def random_camera(rng, size):
    """(fxfycxcy [4], c2w [4, 4]) at a random azimuth, 15-50 degrees up."""
    azimuth = rng.uniform(0, 2 * np.pi)
    elevation = np.radians(rng.uniform(15, 50))
    eye = CAMERA_RADIUS * np.array([np.cos(azimuth) * np.cos(elevation),
                                    np.sin(azimuth) * np.cos(elevation), np.sin(elevation)])
    f = size / (2 * np.tan(np.radians(FOV_DEGREES) / 2))
    return np.array([f, f, size / 2, size / 2]), look_at(eye)


def rays(fxfycxcy, c2w, size):
    """Per pixel ray origins and unit directions, each [size, size, 3]."""
    fx, fy, cx, cy = fxfycxcy
    y, x = np.mgrid[0:size, 0:size] + 0.5
    d = np.stack([(x - cx) / fx, (y - cy) / fy, np.ones_like(x)], axis=-1) @ c2w[:3, :3].T
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    return np.broadcast_to(c2w[:3, 3], d.shape).copy(), d


def render(scene, fxfycxcy, c2w, size):
    """The view as RGB [size, size, 3] in [0, 1]."""
    o, d = rays(fxfycxcy, c2w, size)
    light = np.array([0.4, -0.3, 0.85]) / np.linalg.norm([0.4, -0.3, 0.85])
    sky = 0.55 + 0.35 * d[..., 2:3] * np.array([0.6, 0.8, 1.0])
    image, depth = np.broadcast_to(sky, d.shape).copy(), np.full(d.shape[:2], np.inf)
    floor_t = np.where(d[..., 2] < -1e-6, (-0.35 - o[..., 2]) / np.minimum(d[..., 2], -1e-6),
                       np.inf)
    hit = o + np.where(np.isfinite(floor_t), floor_t, 0)[..., None] * d
    checker = (np.floor(hit[..., 0]) + np.floor(hit[..., 1])) % 2
    floor = (0.35 + 0.3 * checker)[..., None] * np.array([1.0, 0.95, 0.85])
    visible = floor_t < depth
    image[visible], depth[visible] = floor[visible], floor_t[visible]
    for center, radius, color in zip(scene["centers"], scene["radii"], scene["colors"]):
        oc = o - center
        b = np.sum(oc * d, axis=-1)
        disc = b * b - (np.sum(oc * oc, axis=-1) - radius * radius)
        t = np.where(disc > 0, -b - np.sqrt(np.maximum(disc, 0)), np.inf)
        front = (t > 1e-4) & (t < depth)
        normal = (o + np.where(front, t, 0)[..., None] * d - center) / radius
        shade = 0.25 + 0.75 * np.clip(normal @ light, 0, None)
        image[front], depth[front] = (shade[..., None] * color)[front], t[front]
    return np.clip(image, 0, 1)


def posed_views(rng, scene, count, size):
    """`count` random views: images [V, size, size, 3], fxfycxcy [V, 4], c2w [V, 4, 4]."""
    cameras = [random_camera(rng, size) for _ in range(count)]
    images = np.stack([render(scene, k, c2w, size) for k, c2w in cameras])
    return images, np.stack([k for k, _ in cameras]), np.stack([c for _, c in cameras])
