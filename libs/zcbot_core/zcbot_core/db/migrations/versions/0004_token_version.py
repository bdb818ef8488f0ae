"""token revocation: users.token_version, bumped by the database on a password or role change

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:15:00

Every token carries the `token_version` its user had when it was issued (claim `ver`); the gateway's
auth statement accepts it only while the row still has that version. The bump is a trigger, so every
writer (the change-password route, the admin routes, `zcbot user`, a DBA's UPDATE) revokes without
remembering to. The version starts at the row's creation time in milliseconds and a bump never goes
below the current time in milliseconds, so a user deleted and created again under the same user_id
never gets back a version an old token carries.
"""
from __future__ import annotations

from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

NOW_MS = "(floor(extract(epoch from clock_timestamp()) * 1000))::bigint"

BUMP = f"""
CREATE OR REPLACE FUNCTION zcbot_bump_token_version() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NEW.password_hash IS DISTINCT FROM OLD.password_hash OR NEW.role IS DISTINCT FROM OLD.role THEN
        NEW.token_version := greatest(OLD.token_version + 1, {NOW_MS});
    END IF;
    RETURN NEW;
END
$fn$;
"""


def upgrade() -> None:
    op.execute(f"ALTER TABLE users ADD COLUMN token_version bigint NOT NULL DEFAULT {NOW_MS}")
    op.execute(BUMP)
    op.execute("CREATE TRIGGER users_token_version BEFORE UPDATE ON users "
               "FOR EACH ROW EXECUTE FUNCTION zcbot_bump_token_version()")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS users_token_version ON users")
    op.execute("DROP FUNCTION IF EXISTS zcbot_bump_token_version()")
    op.execute("ALTER TABLE users DROP COLUMN token_version")
