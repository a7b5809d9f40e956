-- Runs once, when the PostgreSQL volume is first created (as the idemgate
-- superuser of the official image). Grafana reads the ledger through a
-- read-only role; the tables and dash_* views are created later by
-- `idemgate ledger migrate` as user idemgate, so grant by default privileges.
CREATE ROLE grafana_reader LOGIN PASSWORD 'grafana_reader';
GRANT CONNECT ON DATABASE idemgate TO grafana_reader;
GRANT USAGE ON SCHEMA public TO grafana_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE idemgate IN SCHEMA public GRANT SELECT ON TABLES TO grafana_reader;
