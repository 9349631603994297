-- CreateEnum
CREATE TYPE "TxStatus" AS ENUM ('pending', 'submitted', 'success', 'reverted', 'failed');

-- CreateTable
CREATE TABLE "executions" (
    "id" VARCHAR(32) NOT NULL,
    "key_id" VARCHAR(64),
    "owner_id" VARCHAR(64),
    "job_id" VARCHAR(64),
    "automation_run_id" VARCHAR(64),
    "idempotency_scope" VARCHAR(80),
    "idempotency_key" VARCHAR(255),
    "dex" VARCHAR(16) NOT NULL,
    "token_in" VARCHAR(42) NOT NULL,
    "token_out" VARCHAR(42) NOT NULL,
    "route" TEXT[] NOT NULL,
    "amount_in" VARCHAR(78) NOT NULL,
    "quoted_amount_out" VARCHAR(78) NOT NULL,
    "amount_out_minimum" VARCHAR(78) NOT NULL,
    "amount_out" VARCHAR(78),
    "slippage_bps" INTEGER NOT NULL,
    "usd_value" DOUBLE PRECISION NOT NULL,
    "status" "TxStatus" NOT NULL DEFAULT 'pending',
    "tx_hash" CHAR(66),
    "raw_tx" TEXT,
    "nonce" INTEGER,
    "block_number" BIGINT,
    "error" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "executions_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "launches" (
    "id" VARCHAR(32) NOT NULL,
    "key_id" VARCHAR(64),
    "idempotency_scope" VARCHAR(80),
    "idempotency_key" VARCHAR(255),
    "name" VARCHAR(64) NOT NULL,
    "symbol" VARCHAR(11) NOT NULL,
    "decimals" INTEGER NOT NULL,
    "supply" VARCHAR(78) NOT NULL,
    "chain_id" INTEGER NOT NULL,
    "holder" VARCHAR(42) NOT NULL,
    "status" "TxStatus" NOT NULL DEFAULT 'pending',
    "address" VARCHAR(42),
    "tx_hash" CHAR(66),
    "raw_tx" TEXT,
    "nonce" INTEGER,
    "block_number" BIGINT,
    "error" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "launches_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "executions_idempotency_scope_idempotency_key_key" ON "executions"("idempotency_scope", "idempotency_key");

-- CreateIndex
CREATE INDEX "executions_key_id_created_at_idx" ON "executions"("key_id", "created_at");

-- CreateIndex
CREATE UNIQUE INDEX "launches_address_key" ON "launches"("address");

-- CreateIndex
CREATE UNIQUE INDEX "launches_idempotency_scope_idempotency_key_key" ON "launches"("idempotency_scope", "idempotency_key");

-- CreateIndex
CREATE INDEX "launches_key_id_created_at_idx" ON "launches"("key_id", "created_at");
