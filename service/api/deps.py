"""What a route asks for, as Annotated dependencies: the running Service, the Service once its models are ready,
and the owner of the request's API key."""

from __future__ import annotations

from typing import Annotated

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


async def owner(request: Request) -> str | None:
    """The owner id of the request's API key (service.api.access.owner_of), None without keys: service.api.guard
    checks the key before the body is read (the OpenAPI document's bearer scheme: service.api.openapi)."""
    value: str | None = request.state.owner
    return value


AnyService = Annotated[Service, Depends(get_service)]
ReadyService = Annotated[Service, Depends(ready_service)]
Owner = Annotated[str | None, Depends(owner)]
