-- CreateEnum
CREATE TYPE "AutomationStatus" AS ENUM ('active', 'paused', 'completed', 'failed');

-- CreateEnum
CREATE TYPE "RunStatus" AS ENUM ('running', 'success', 'failed');

-- CreateTable
CREATE TABLE "automations" (
    "id" VARCHAR(32) NOT NULL,
    "owner_id" VARCHAR(64) NOT NULL,
    "key_id" VARCHAR(64),
    "wallet_address" VARCHAR(42) NOT NULL,
    "type" VARCHAR(32) NOT NULL,
    "name" VARCHAR(128) NOT NULL,
    "config" JSONB NOT NULL,
    "status" "AutomationStatus" NOT NULL DEFAULT 'active',
    "next_run_at" TIMESTAMPTZ(3),
    "runs" INTEGER NOT NULL DEFAULT 0,
    "failures" INTEGER NOT NULL DEFAULT 0,
    "status_reason" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "automations_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "automation_runs" (
    "id" VARCHAR(32) NOT NULL,
    "automation_id" VARCHAR(32) NOT NULL,
    "scheduled_for" TIMESTAMPTZ(3) NOT NULL,
    "status" "RunStatus" NOT NULL DEFAULT 'running',
    "lease_until" TIMESTAMPTZ(3),
    "attempts" INTEGER NOT NULL DEFAULT 1,
    "amount_in" VARCHAR(78) NOT NULL,
    "amount_out" VARCHAR(78),
    "tx_hash" VARCHAR(66),
    "execution_id" VARCHAR(64),
    "error" TEXT,
    "started_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finished_at" TIMESTAMPTZ(3),

    CONSTRAINT "automation_runs_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "automations_owner_id_wallet_address_created_at_idx" ON "automations"("owner_id", "wallet_address", "created_at");

-- CreateIndex
CREATE INDEX "automations_status_next_run_at_idx" ON "automations"("status", "next_run_at");

-- CreateIndex
CREATE UNIQUE INDEX "automation_runs_automation_id_scheduled_for_key" ON "automation_runs"("automation_id", "scheduled_for");

-- CreateIndex
CREATE INDEX "automation_runs_status_lease_until_idx" ON "automation_runs"("status", "lease_until");

-- AddForeignKey
ALTER TABLE "automation_runs" ADD CONSTRAINT "automation_runs_automation_id_fkey" FOREIGN KEY ("automation_id") REFERENCES "automations"("id") ON DELETE CASCADE ON UPDATE CASCADE;
