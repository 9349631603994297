-- AlterTable: the payment a paid job was bought with, and the outcome reported for it
ALTER TABLE "jobs" ADD COLUMN     "payment" VARCHAR(109),
ADD COLUMN     "payment_outcome" VARCHAR(8),
ADD COLUMN     "payment_reason" TEXT,
ADD COLUMN     "outcome_published_at" TIMESTAMPTZ(3);

-- CreateIndex: the outcomes still to publish (the sweep's query); finished paid jobs only
CREATE INDEX "jobs_outcome_unpublished_idx" ON "jobs"("updated_at") WHERE "payment_outcome" IS NOT NULL AND "outcome_published_at" IS NULL;
