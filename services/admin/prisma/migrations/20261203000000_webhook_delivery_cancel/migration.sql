-- A pending webhook delivery can be cancelled (status 'cancelled'): when its subscription's key is
-- revoked it is never sent, and the log says when and why. The retention purge ends it at cancelled_at.
ALTER TABLE "webhook_deliveries" ADD COLUMN "cancelled_at" TIMESTAMPTZ(3);
ALTER TABLE "webhook_deliveries" ADD COLUMN "cancel_reason" TEXT;
