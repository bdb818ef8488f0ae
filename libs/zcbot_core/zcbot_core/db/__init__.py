"""PostgreSQL through SQLAlchemy 2 (async, psycopg 3) with alembic migrations."""
