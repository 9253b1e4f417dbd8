-- Privileges. Nothing in schema claim is usable by PUBLIC except what is
-- granted here; administrative functions are for the extension owner and
-- whoever it grants them to.
REVOKE ALL ON ALL TABLES IN SCHEMA claim FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA claim FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.create_queue(text, interval, integer, interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.drop_queue(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION claim.redrive(text, bigint[]) FROM PUBLIC;
