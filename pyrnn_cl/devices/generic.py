"""The fallback profile: any OpenCL implementation no other profile claims."""

from __future__ import annotations

from .base import VendorProfile


class GenericProfile(VendorProfile):
    name = "generic"
    # Lowest: tried last, and it always matches.
    priority = -1000

    def matches(self, info) -> bool:
        return True

    def default_rank(self, info):
        # Oclgrind is a simulator for debugging kernels (hundreds of times slower than a real
        # device); it is chosen only when asked for by name ("oclgrind").
        if "oclgrind" in (info.platform_name + " " + info.name).lower():
            return None
        return super().default_rank(info)
