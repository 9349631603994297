-- automations buy for their wallet: the swap sends tokenOut there
ALTER TABLE "executions" ADD COLUMN "recipient" VARCHAR(42);
