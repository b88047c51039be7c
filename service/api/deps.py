"""What a route asks for, as Annotated dependencies: the running Service, the Service once its models are ready,
and that Service with the owner of the request's API key (one dependency: FastAPI solves each one per request)."""

from __future__ import annotations

from typing import Annotated, NamedTuple

from fastapi import Depends, Request

from service.api.runtime import Service
from service.errors import Unavailable


# Dependencies are coroutines: FastAPI runs a plain function in a worker thread, a costly hop per request.
async def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


async def ready_service(request: Request) -> Service:
    service: Service = request.app.state.service
    if not service.ready.is_set():
        raise Unavailable(service.load_error or "the models are still loading", retry_after=2)
    return service


class Calling(NamedTuple):
    """The ready Service and the owner id of the request's API key (service.api.access.owner_of), None without
    keys: service.api.guard checks the key before the body is read (the OpenAPI document's bearer scheme:
    service.api.openapi)."""

    service: Service
    owner: str | None


async def calling(request: Request) -> Calling:
    owner: str | None = request.state.owner
    return Calling(await ready_service(request), owner)


AnyService = Annotated[Service, Depends(get_service)]
ReadyService = Annotated[Service, Depends(ready_service)]
Caller = Annotated[Calling, Depends(calling)]
