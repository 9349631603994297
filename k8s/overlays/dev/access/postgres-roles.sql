-- Generated from the fleet (packages/fleet/src/roles.ts): do not edit. Run with psql as a superuser;
-- each role password comes from its environment variable. Safe to run again (docs/security.md).
\set ON_ERROR_STOP on
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- ats_admin owns the schema admin
\getenv ats_admin_password ATS_DB_PASSWORD_ADMIN
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ats_admin') THEN CREATE ROLE "ats_admin"; END IF; END $$;
ALTER ROLE "ats_admin" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'ats_admin_password';
CREATE SCHEMA IF NOT EXISTS "admin" AUTHORIZATION "ats_admin";
ALTER SCHEMA "admin" OWNER TO "ats_admin";
REVOKE ALL ON SCHEMA "admin" FROM PUBLIC;
DO $$ DECLARE o record; BEGIN
  FOR o IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'admin' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> 'ats_admin'::regrole
  LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO %I', CASE o.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, 'admin', o.relname, 'ats_admin');
  END LOOP;
  FOR o IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'admin' AND c.relkind = 'S' AND c.relowner <> 'ats_admin'::regrole
  LOOP
    EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO %I', 'admin', o.relname, 'ats_admin');
  END LOOP;
  FOR o IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = 'admin' AND t.typtype IN ('e', 'd') AND t.typowner <> 'ats_admin'::regrole
  LOOP
    EXECUTE format('ALTER TYPE %I.%I OWNER TO %I', 'admin', o.typname, 'ats_admin');
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'admin' AND p.proowner <> 'ats_admin'::regrole
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO %I', o.fn, 'ats_admin');
  END LOOP;
END $$;

-- ats_agent owns the schema agent
\getenv ats_agent_password ATS_DB_PASSWORD_AGENT
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ats_agent') THEN CREATE ROLE "ats_agent"; END IF; END $$;
ALTER ROLE "ats_agent" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'ats_agent_password';
CREATE SCHEMA IF NOT EXISTS "agent" AUTHORIZATION "ats_agent";
ALTER SCHEMA "agent" OWNER TO "ats_agent";
REVOKE ALL ON SCHEMA "agent" FROM PUBLIC;
DO $$ DECLARE o record; BEGIN
  FOR o IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'agent' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> 'ats_agent'::regrole
  LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO %I', CASE o.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, 'agent', o.relname, 'ats_agent');
  END LOOP;
  FOR o IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'agent' AND c.relkind = 'S' AND c.relowner <> 'ats_agent'::regrole
  LOOP
    EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO %I', 'agent', o.relname, 'ats_agent');
  END LOOP;
  FOR o IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = 'agent' AND t.typtype IN ('e', 'd') AND t.typowner <> 'ats_agent'::regrole
  LOOP
    EXECUTE format('ALTER TYPE %I.%I OWNER TO %I', 'agent', o.typname, 'ats_agent');
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'agent' AND p.proowner <> 'ats_agent'::regrole
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO %I', o.fn, 'ats_agent');
  END LOOP;
END $$;

-- ats_automation owns the schema automation
\getenv ats_automation_password ATS_DB_PASSWORD_AUTOMATION
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ats_automation') THEN CREATE ROLE "ats_automation"; END IF; END $$;
ALTER ROLE "ats_automation" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'ats_automation_password';
CREATE SCHEMA IF NOT EXISTS "automation" AUTHORIZATION "ats_automation";
ALTER SCHEMA "automation" OWNER TO "ats_automation";
REVOKE ALL ON SCHEMA "automation" FROM PUBLIC;
DO $$ DECLARE o record; BEGIN
  FOR o IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'automation' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> 'ats_automation'::regrole
  LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO %I', CASE o.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, 'automation', o.relname, 'ats_automation');
  END LOOP;
  FOR o IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'automation' AND c.relkind = 'S' AND c.relowner <> 'ats_automation'::regrole
  LOOP
    EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO %I', 'automation', o.relname, 'ats_automation');
  END LOOP;
  FOR o IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = 'automation' AND t.typtype IN ('e', 'd') AND t.typowner <> 'ats_automation'::regrole
  LOOP
    EXECUTE format('ALTER TYPE %I.%I OWNER TO %I', 'automation', o.typname, 'ats_automation');
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'automation' AND p.proowner <> 'ats_automation'::regrole
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO %I', o.fn, 'ats_automation');
  END LOOP;
END $$;

-- ats_market_data owns the schema market_data
\getenv ats_market_data_password ATS_DB_PASSWORD_MARKET_DATA
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ats_market_data') THEN CREATE ROLE "ats_market_data"; END IF; END $$;
ALTER ROLE "ats_market_data" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'ats_market_data_password';
CREATE SCHEMA IF NOT EXISTS "market_data" AUTHORIZATION "ats_market_data";
ALTER SCHEMA "market_data" OWNER TO "ats_market_data";
REVOKE ALL ON SCHEMA "market_data" FROM PUBLIC;
DO $$ DECLARE o record; BEGIN
  FOR o IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'market_data' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> 'ats_market_data'::regrole
  LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO %I', CASE o.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, 'market_data', o.relname, 'ats_market_data');
  END LOOP;
  FOR o IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'market_data' AND c.relkind = 'S' AND c.relowner <> 'ats_market_data'::regrole
  LOOP
    EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO %I', 'market_data', o.relname, 'ats_market_data');
  END LOOP;
  FOR o IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = 'market_data' AND t.typtype IN ('e', 'd') AND t.typowner <> 'ats_market_data'::regrole
  LOOP
    EXECUTE format('ALTER TYPE %I.%I OWNER TO %I', 'market_data', o.typname, 'ats_market_data');
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'market_data' AND p.proowner <> 'ats_market_data'::regrole
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO %I', o.fn, 'ats_market_data');
  END LOOP;
END $$;

-- ats_trading owns the schema trading
\getenv ats_trading_password ATS_DB_PASSWORD_TRADING
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ats_trading') THEN CREATE ROLE "ats_trading"; END IF; END $$;
ALTER ROLE "ats_trading" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'ats_trading_password';
CREATE SCHEMA IF NOT EXISTS "trading" AUTHORIZATION "ats_trading";
ALTER SCHEMA "trading" OWNER TO "ats_trading";
REVOKE ALL ON SCHEMA "trading" FROM PUBLIC;
DO $$ DECLARE o record; BEGIN
  FOR o IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'trading' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> 'ats_trading'::regrole
  LOOP
    EXECUTE format('ALTER %s %I.%I OWNER TO %I', CASE o.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, 'trading', o.relname, 'ats_trading');
  END LOOP;
  FOR o IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'trading' AND c.relkind = 'S' AND c.relowner <> 'ats_trading'::regrole
  LOOP
    EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO %I', 'trading', o.relname, 'ats_trading');
  END LOOP;
  FOR o IN SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = 'trading' AND t.typtype IN ('e', 'd') AND t.typowner <> 'ats_trading'::regrole
  LOOP
    EXECUTE format('ALTER TYPE %I.%I OWNER TO %I', 'trading', o.typname, 'ats_trading');
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'trading' AND p.proowner <> 'ats_trading'::regrole
  LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO %I', o.fn, 'ats_trading');
  END LOOP;
END $$;
