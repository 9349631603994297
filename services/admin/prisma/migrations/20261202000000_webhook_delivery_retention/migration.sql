-- The retention purge finds succeeded deliveries by their end time (WEBHOOK_DELIVERY_RETENTION_DAYS):
-- without this index each hourly pass would read every succeeded delivery to find none are old enough.
-- IF NOT EXISTS: on a large table, create it first with CREATE INDEX CONCURRENTLY (same name) and this
-- migration, which runs in a transaction, blocks no writes (docs/webhooks.md, "Retention").
CREATE INDEX IF NOT EXISTS "webhook_deliveries_status_delivered_at_idx" ON "webhook_deliveries"("status", "delivered_at");
