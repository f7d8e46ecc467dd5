"""gRPC plumbing shared by snapview's services: status codes for our errors, and asyncio
handlers that decode requests themselves so that garbage bytes get INVALID_ARGUMENT, never
UNKNOWN.

The handlers are for a ``grpc.aio`` server. A service method written as a plain function (the
usual case: it reads or writes the store) runs in the event loop's default executor, a bounded
thread pool the server sets, so a thread is held only while a request is being worked on. A
server-streaming method may be a plain generator: each ``next`` runs in the pool. A method
written as a coroutine (or, for a bidirectional stream, an async generator) runs on the loop
itself and must not block; an open stream then holds no thread at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NoReturn

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

from kvstore.errors import (
    InvalidArgument,
    RequestError,
    SnapviewError,
    TxnError,
    status_message,
)

log = logging.getLogger("snapview.rpc")
ERROR_CLASS_KEY = "snapview-error-class"
_END = object()


def status_code_of(exc: BaseException) -> grpc.StatusCode:
    if isinstance(exc, RequestError | TxnError | SnapviewError):
        return getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL)
    return grpc.StatusCode.INTERNAL


async def abort_with(
    context: grpc.aio.ServicerContext, method: str, exc: BaseException
) -> NoReturn:
    """End the call with the status code for ``exc`` (INTERNAL for a bug, never UNKNOWN)."""
    if not isinstance(exc, SnapviewError):
        log.error("internal error in %s", method, exc_info=exc)
        await context.abort(
            grpc.StatusCode.INTERNAL,
            status_message(f"{method}: internal error: {type(exc).__name__}: {exc}"),
        )
    # The class name rides along so a Python client can raise the very same exception type.
    context.set_trailing_metadata(((ERROR_CLASS_KEY, type(exc).__name__),))
    await context.abort(status_code_of(exc), status_message(str(exc)))
    raise AssertionError("context.abort returned")  # it raises AbortError


def _serialize(response: Any) -> bytes:
    # Plain methods' responses are serialized in the pool (bytes); coroutines' on the loop.
    return response if isinstance(response, bytes) else response.SerializeToString()


def generic_handler(
    service: str, descriptor: ServiceDescriptor, impl: object
) -> grpc.GenericRpcHandler:
    """Serve every method of ``descriptor`` (a protobuf ServiceDescriptor) with the same-named
    method of ``impl``. Requests arrive as raw bytes and are parsed here, so a malformed request
    is answered INVALID_ARGUMENT naming the method instead of a framework INTERNAL."""
    handlers = {}
    for m in descriptor.methods:
        fn = getattr(impl, m.name)
        req_cls = _message_class(m.input_type)
        if m.client_streaming and m.server_streaming:
            if not inspect.isasyncgenfunction(fn):
                raise TypeError(f"{m.full_name}: a bidirectional stream needs an async generator")
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(
                _wrap_bidi(m.full_name, fn, req_cls), response_serializer=_serialize
            )
        elif m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                _wrap_stream(m.full_name, fn, req_cls), response_serializer=_serialize
            )
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                _wrap_unary(m.full_name, fn, req_cls), response_serializer=_serialize
            )
    return grpc.method_handlers_generic_handler(service, handlers)


def _message_class(desc):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(desc)


def _parse(method: str, req_cls, raw: bytes):
    try:
        return req_cls.FromString(raw)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise InvalidArgument(
            f"{method}: request is not a valid {req_cls.DESCRIPTOR.name}: {e}"
        ) from None


def _wrap_unary(method: str, fn: Callable, req_cls):
    if inspect.iscoroutinefunction(fn):

        async def on_loop(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                return await fn(_parse(method, req_cls, raw), context)
            except grpc.aio.AbortError:
                raise
            except Exception as e:  # noqa: BLE001 - every failure gets a definite status
                await abort_with(context, method, e)

        return on_loop

    def work(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return fn(_parse(method, req_cls, raw), context).SerializeToString()

    async def in_pool(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(None, work, raw, context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:  # noqa: BLE001
            await abort_with(context, method, e)

    return in_pool


def _wrap_stream(method: str, fn: Callable, req_cls):
    def start(raw: bytes, context: grpc.aio.ServicerContext) -> Iterator[Any]:
        return iter(fn(_parse(method, req_cls, raw), context))

    def step(it: Iterator[Any]) -> Any:
        item: Any = next(it, _END)
        return item if item is _END else item.SerializeToString()

    async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        it: Iterator[Any] | None = None
        try:
            it = await loop.run_in_executor(None, start, raw, context)
            while (item := await loop.run_in_executor(None, step, it)) is not _END:
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as e:  # noqa: BLE001
            await abort_with(context, method, e)
        finally:
            # A client that goes away mid-stream: let the generator clean up (unless a step of
            # it is still running in the pool; then it is closed when collected).
            if it is not None and hasattr(it, "close"):
                with contextlib.suppress(ValueError):
                    it.close()

    return handler


def _wrap_bidi(method: str, fn: Callable, req_cls):
    async def handler(
        raw_iter: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async def requests() -> AsyncIterator[Any]:
            async for raw in raw_iter:
                yield _parse(method, req_cls, raw)

        try:
            async for response in fn(requests(), context):
                yield response
        except grpc.aio.AbortError:
            raise
        except Exception as e:  # noqa: BLE001
            await abort_with(context, method, e)

    return handler
