from pg_fixtures import *  # noqa: F401,F403  (store_url, pg_url, pg_server: both backends, see pg_fixtures.py)
