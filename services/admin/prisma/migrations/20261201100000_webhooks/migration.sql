-- Webhook subscriptions and their deliveries (issue 25)
CREATE TABLE "webhook_subscriptions" (
  "id" TEXT NOT NULL,
  "key_id" VARCHAR(64) NOT NULL,
  "url" TEXT NOT NULL,
  "events" TEXT[] NOT NULL,
  "description" VARCHAR(200),
  "secret" TEXT NOT NULL,
  "previous_secret" TEXT,
  "previous_secret_until" TIMESTAMPTZ(3),
  "enabled" BOOLEAN NOT NULL DEFAULT true,
  "disabled_reason" TEXT,
  "failing_since" TIMESTAMPTZ(3),
  "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT "webhook_subscriptions_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "webhook_subscriptions_key_id_idx" ON "webhook_subscriptions"("key_id");

CREATE TABLE "webhook_deliveries" (
  "id" TEXT NOT NULL,
  "subscription_id" TEXT NOT NULL,
  "event_id" VARCHAR(64) NOT NULL,
  "event_type" VARCHAR(64) NOT NULL,
  "body" TEXT NOT NULL,
  "status" VARCHAR(16) NOT NULL DEFAULT 'pending',
  "attempts" INTEGER NOT NULL DEFAULT 0,
  "next_attempt_at" TIMESTAMPTZ(3) DEFAULT CURRENT_TIMESTAMP,
  "locked_until" TIMESTAMPTZ(3),
  "attempt_log" JSONB NOT NULL DEFAULT '[]',
  "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  "delivered_at" TIMESTAMPTZ(3),
  CONSTRAINT "webhook_deliveries_pkey" PRIMARY KEY ("id"),
  CONSTRAINT "webhook_deliveries_subscription_id_fkey" FOREIGN KEY ("subscription_id") REFERENCES "webhook_subscriptions"("id") ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE UNIQUE INDEX "webhook_deliveries_subscription_id_event_id_key" ON "webhook_deliveries"("subscription_id", "event_id");
CREATE INDEX "webhook_deliveries_status_next_attempt_at_idx" ON "webhook_deliveries"("status", "next_attempt_at");
CREATE INDEX "webhook_deliveries_subscription_id_created_at_idx" ON "webhook_deliveries"("subscription_id", "created_at");
