-- Issue 23: the gas of approvals and launches counts against spend limits.
ALTER TABLE "executions" ADD COLUMN "gas_usd" DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE "launches" ADD COLUMN "usd_value" DOUBLE PRECISION NOT NULL DEFAULT 0;
