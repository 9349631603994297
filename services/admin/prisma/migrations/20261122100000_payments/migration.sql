-- CreateEnum
CREATE TYPE "SettlementState" AS ENUM ('pending', 'settling', 'settled', 'failed', 'skipped');

-- CreateTable
CREATE TABLE "payments" (
    "id" BIGSERIAL NOT NULL,
    "payer" VARCHAR(42) NOT NULL,
    "pay_to" VARCHAR(42) NOT NULL,
    "asset" VARCHAR(42) NOT NULL,
    "chain_id" INTEGER NOT NULL,
    "network" VARCHAR(64) NOT NULL,
    "x402_version" SMALLINT NOT NULL,
    "amount" BIGINT NOT NULL,
    "valid_after" BIGINT NOT NULL,
    "valid_before" BIGINT NOT NULL,
    "nonce" CHAR(66) NOT NULL,
    "signature" CHAR(132) NOT NULL,
    "method" VARCHAR(10) NOT NULL,
    "route" TEXT NOT NULL,
    "resource" TEXT NOT NULL,
    "request_id" VARCHAR(64) NOT NULL,
    "charged_at" TIMESTAMPTZ(3) NOT NULL,
    "recorded_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "state" "SettlementState" NOT NULL DEFAULT 'pending',
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "next_attempt_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "tx_hash" CHAR(66),
    "settle_error" TEXT,
    "settled_at" TIMESTAMPTZ(3),

    CONSTRAINT "payments_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "payments_payer_nonce_key" ON "payments"("payer", "nonce");

-- CreateIndex
CREATE INDEX "payments_charged_at_idx" ON "payments"("charged_at");

-- CreateIndex
CREATE INDEX "payments_state_next_attempt_at_idx" ON "payments"("state", "next_attempt_at");
