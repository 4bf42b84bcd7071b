"""The HTTP API's routes, one router per resource, each a module of route functions over the
shared service (`kg.server.service`); `deps` holds what they all depend on (the caller)."""

from __future__ import annotations

from fastapi import APIRouter

from kg.server.routes import admin, episodes, erase, facts, review, search

ROUTERS: list[APIRouter] = [
    admin.service,
    admin.router,
    episodes.router,
    facts.router,
    search.router,
    review.router,
    erase.router,
]
