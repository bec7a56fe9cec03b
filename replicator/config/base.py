"""The base of every config model: frozen, unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
