"""JWT (HS256) and bcrypt. Roles are read from the DB on each admin request, never from the token.

A token carries its user's `token_version` (claim `ver`) from when it was issued; the gateway accepts
it only while the user row still has that version, so a password or role change (the database bumps
the version, migration 0004) or the user's deletion revokes every token issued before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import bcrypt
import jwt

from zcbot_core.errors import ZcbotError

ALGORITHM = "HS256"
MIN_PASSWORD_LENGTH = 8


class AuthError(ZcbotError):
    """A missing, malformed, expired or forged token (the client's fault: 401)."""

    code = "unauthorized"
    http_status = 401
    headers = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class TokenClaims:
    user_id: str
    issued_at: int
    expires_at: int
    version: int


def issue_token(user_id: str, secret: str, ttl_seconds: int, version: int) -> str:
    now = int(time.time())
    return jwt.encode({"sub": user_id, "iat": now, "exp": now + ttl_seconds, "ver": version}, secret,
                      algorithm=ALGORITHM)


# Tokens whose signature and claims were checked, by (secret, token): a client sends the same token on
# every request, and PyJWT's decode (base64, JSON, HMAC) was ~8 % of the gateway's CPU per request.
# Expiry is still checked on every use; a new secret misses the cache, so rotation takes effect at once.
_VERIFIED: dict[tuple[str, str], TokenClaims] = {}
MAX_VERIFIED_TOKENS = 10_000


def verify_token(token: str, secret: str) -> TokenClaims:
    key = (secret, token)
    claims = _VERIFIED.get(key)
    if claims is None:
        claims = _decode(token, secret)
        if len(_VERIFIED) >= MAX_VERIFIED_TOKENS:
            del _VERIFIED[next(iter(_VERIFIED))]  # the oldest entry
        _VERIFIED[key] = claims
    elif claims.expires_at <= int(time.time()):  # as PyJWT decides it
        del _VERIFIED[key]
        raise AuthError("token expired")
    return claims


def _decode(token: str, secret: str) -> TokenClaims:
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], options={"require": ["sub", "exp", "iat", "ver"]})
    except jwt.ExpiredSignatureError:
        raise AuthError("token expired") from None
    except jwt.PyJWTError:
        raise AuthError("invalid token") from None
    sub, ver = claims.get("sub"), claims.get("ver")
    if not isinstance(sub, str) or not sub or not isinstance(ver, int) or isinstance(ver, bool):
        raise AuthError("invalid token")
    return TokenClaims(user_id=sub, issued_at=int(claims["iat"]), expires_at=int(claims["exp"]), version=ver)


def hash_password(password: str) -> str:
    return bcrypt.hashpw(password.encode()[:72], bcrypt.gensalt(rounds=10)).decode()


def check_password(password: str, hashed: str | None) -> bool:
    if not hashed:
        # Spend comparable time so a missing user is indistinguishable from a wrong password.
        bcrypt.checkpw(b"x", _DUMMY_HASH)
        return False
    try:
        return bcrypt.checkpw(password.encode()[:72], hashed.encode())
    except ValueError:
        return False


class WeakPassword(ZcbotError, ValueError):
    """A new password that is not acceptable (the caller's fault: 400)."""

    code = "weak_password"
    http_status = 400


def validate_new_password(password: str) -> None:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise WeakPassword(f"password must be at least {MIN_PASSWORD_LENGTH} characters")
    if len(password.encode()) > 72:
        raise WeakPassword("password must be at most 72 bytes")


_DUMMY_HASH = bcrypt.hashpw(b"dummy-password", bcrypt.gensalt(rounds=10))
