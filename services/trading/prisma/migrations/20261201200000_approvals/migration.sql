-- Issue 25: swaps over a spend policy's approvalAboveUsd wait for a person's decision.
CREATE TYPE "ApprovalStatus" AS ENUM ('pending', 'approved', 'rejected', 'expired');

CREATE TABLE "approvals" (
    "id" VARCHAR(32) NOT NULL,
    "status" "ApprovalStatus" NOT NULL DEFAULT 'pending',
    "key_id" VARCHAR(64),
    "owner_id" VARCHAR(64),
    "job_id" VARCHAR(64),
    "automation_run_id" VARCHAR(64),
    "idempotency_scope" VARCHAR(80),
    "idempotency_key" VARCHAR(255),
    "request" JSONB NOT NULL,
    "token_in" VARCHAR(42) NOT NULL,
    "token_out" VARCHAR(42) NOT NULL,
    "quote" JSONB NOT NULL,
    "usd_value" DOUBLE PRECISION,
    "policy_owner" VARCHAR(80) NOT NULL,
    "approval_above_usd" DOUBLE PRECISION NOT NULL,
    "reason" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "decided_at" TIMESTAMPTZ(3),
    "decided_by" VARCHAR(64),
    "decision_reason" TEXT,
    "execution_id" VARCHAR(32),
    "result" JSONB,
    "error" TEXT,
    CONSTRAINT "approvals_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "approvals_key_id_created_at_idx" ON "approvals"("key_id", "created_at");
CREATE INDEX "approvals_owner_id_created_at_idx" ON "approvals"("owner_id", "created_at");
-- the sweeps: pending ones past expires_at, approved ones with no outcome yet
CREATE INDEX "approvals_open_idx" ON "approvals"("status", "expires_at") WHERE "result" IS NULL AND "error" IS NULL;
