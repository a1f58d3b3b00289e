"""Dagster face of the artifact store."""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from awm_resources.store import ArtifactStore


class StoreResource(dg.ConfigurableResource):
    root: str | None = Field(default=None, description="artifact store root; default $AWM_HOME or <project>/.awm_home")

    def get_store(self) -> ArtifactStore:
        return ArtifactStore(self.root or None)
