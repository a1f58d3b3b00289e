"""Dagster resource for the Ray cluster: connect to `RAY_ADDRESS` (or `address`), else start a local Ray."""

from __future__ import annotations

import dagster as dg
from pydantic import Field


class RayResource(dg.ConfigurableResource):
    address: str | None = Field(default=None, description="Ray address (ray://... or host:port); default $RAY_ADDRESS, else local")
    num_cpus: int | None = Field(default=None, description="CPUs for a local Ray (default: all)")

    def connect(self) -> dict:
        """Idempotent: returns cluster info (address, resources)."""
        from awm_rl.ray_cluster import init_ray

        return init_ray(self.address or None, num_cpus=self.num_cpus)
