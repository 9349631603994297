-- AlterTable: a job paid by prepaid credit: the wallet, the hold the gateway took for it (its id and
-- amount), and, with the final status, how much of the hold the work used and why; then when that
-- report went into the credit stream
ALTER TABLE "jobs" ADD COLUMN "credit_wallet" VARCHAR(42),
ADD COLUMN "credit_hold" VARCHAR(64),
ADD COLUMN "credit_hold_amount" BIGINT,
ADD COLUMN "credit_charged" BIGINT,
ADD COLUMN "credit_outcome" VARCHAR(8),
ADD COLUMN "credit_reason" TEXT,
ADD COLUMN "credit_usage" JSONB,
ADD COLUMN "credit_published_at" TIMESTAMPTZ(3);

-- CreateIndex: the usage reports still to publish (the sweep's query); credit-paid jobs only
CREATE INDEX "jobs_credit_unpublished_idx" ON "jobs"("updated_at") WHERE "credit_hold" IS NOT NULL AND "credit_published_at" IS NULL;
