"""What every API module of the broker uses to handle a request: decode its body, answer it, authorize it, and
share the event loop in time slices. api.py (the data path, groups, topics) and admin.py (the admin APIs) both
import it; neither imports the other for it."""

from __future__ import annotations

import logging
import time

from ..errors import KafkaError, PolicyViolationError, UnknownServerError
from . import protocol

log = logging.getLogger("kafkalog.broker")

CLUSTER_ID = "kafkalog-single-node"


def error_code(exc: BaseException) -> int:
    if isinstance(exc, KafkaError):
        return exc.code if exc.code != -1 else UnknownServerError.code
    return UnknownServerError.code


def allowed(s, ctx, operation: str, resource_type: str, name: str) -> bool:
    """Whether ``ctx``'s principal may do ``operation`` on the resource (always, without an authorizer)."""
    a = s.authorizer
    if a is None:
        return True
    return a.authorize(ctx.principal, ctx.connection.peer_host, operation, resource_type, name)


def not_allowed(s, ctx, operation, resource_type, name) -> bool:
    """``allowed``'s negation that logs the refusal (a handler answers the resource's AUTHORIZATION_FAILED)."""
    if allowed(s, ctx, operation, resource_type, name):
        return False
    log.info("denied %s %s on %s %s from %s", ctx.principal, operation, resource_type, name, ctx.peer)
    return True


def respond(header, body: dict) -> list:
    return protocol.encode_response(header.api_key, header.api_version, header.correlation_id, body)


def request_body(ctx, header, frame, offset) -> dict:
    body = ctx.body
    if body is not None:  # decoded off the loop (a big frame, see the server)
        ctx.body = None
        return body
    return protocol.decode_request(header.api_key, header.api_version, frame, offset)


# ---------------------------------------------------------------------------------------------------- time slices
# A request naming thousands of partitions must not hold the loop for seconds: handlers that loop over a
# request's items are generators that ``yield`` when their slice of loop time is used up (``yield`` an awaitable
# to wait for it off the loop). ``run_sliced`` (api.py) answers at once when the handler never yielded.

SLICE_S = 0.002  # loop time one request may take before other connections get their turn


class Slice:
    __slots__ = ("until", "spent")

    def __init__(self):
        self.until = time.perf_counter() + SLICE_S
        self.spent = False  # a slice ran out: a big request (its answer is encoded off the loop too)

    def due(self) -> bool:
        """True when the slice is used up (a new one starts: ``yield`` now)."""
        now = time.perf_counter()
        if now < self.until:
            return False
        self.until = now + SLICE_S
        self.spent = True
        return True


def answer_sliced(s, sl: Slice, header, body: dict):
    """The response chunks; a big request's answer (``sl`` ran out) is encoded by a worker thread."""
    if not sl.spent:
        return respond(header, body)
    return (yield s.loop.run_in_executor(None, respond, header, body))


def check_partition_budget(s, n: int) -> None:
    """KIP-578's max.broker.partitions: refused before anything touches the disk."""
    limit = s.config["max.broker.partitions"]
    if n > limit:
        raise PolicyViolationError(f"{n} partitions exceed max.broker.partitions={limit}")
    hosted = s.store.partition_count()
    if hosted + n > limit:
        raise PolicyViolationError(f"{n} more partitions would make {hosted + n}, over max.broker.partitions={limit}")
