-- AlterEnum: payments of agent jobs wait (held) for their job's outcome; a failed job's is voided
ALTER TYPE "SettlementState" ADD VALUE 'held';
ALTER TYPE "SettlementState" ADD VALUE 'voided';

-- AlterTable
ALTER TABLE "payments" ADD COLUMN     "job_id" VARCHAR(64),
ADD COLUMN     "void_reason" TEXT;

-- CreateTable
CREATE TABLE "job_outcomes" (
    "job_id" VARCHAR(64) NOT NULL,
    "payer" VARCHAR(42) NOT NULL,
    "nonce" CHAR(66) NOT NULL,
    "outcome" VARCHAR(8) NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "reason" TEXT,
    "ended_at" TIMESTAMPTZ(3) NOT NULL,
    "recorded_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "job_outcomes_pkey" PRIMARY KEY ("job_id")
);

-- CreateIndex
CREATE INDEX "payments_job_id_idx" ON "payments"("job_id");
