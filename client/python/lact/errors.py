"""LactError: how every failure of a lact call reaches the caller."""

import grpc


class LactError(Exception):
    """A lact call failed.

    ``code`` is a ``grpc.StatusCode`` (the server's, or INVALID_ARGUMENT for
    input the client refuses before sending it); ``message`` is the server's
    message, word for word, possibly prefixed with where it happened (e.g.
    "shard 1 on worker 127.0.0.1:4242: ...").
    """

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def invalid(message: str) -> LactError:
    """A LactError for input refused on this side of the wire."""
    return LactError(grpc.StatusCode.INVALID_ARGUMENT, message)


def from_rpc_error(error: grpc.RpcError, where: str = "") -> LactError:
    """The LactError for a failed gRPC call; ``where`` prefixes its message."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    return LactError(code or grpc.StatusCode.UNKNOWN, where + (details or str(error)))
