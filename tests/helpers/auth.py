"""HTTP auth headers for the tests' API calls."""

from __future__ import annotations


def bearer(token: str) -> dict[str, str]:
    """The Authorization header carrying `token`."""
    return {"Authorization": f"Bearer {token}"}
