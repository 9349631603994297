-- Prepaid credit: accounts, their movements, holds of metered work, top-ups and withdrawals
CREATE TYPE "CreditEntryKind" AS ENUM ('topup', 'debit', 'hold', 'capture', 'release', 'withdraw', 'refund');

CREATE TABLE "credit_accounts" (
  "wallet" VARCHAR(42) NOT NULL,
  "balance" BIGINT NOT NULL DEFAULT 0,
  "held" BIGINT NOT NULL DEFAULT 0,
  "low_notified" BOOLEAN NOT NULL DEFAULT true,
  "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT "credit_accounts_pkey" PRIMARY KEY ("wallet")
);

CREATE TABLE "credit_entries" (
  "id" BIGSERIAL NOT NULL,
  "wallet" VARCHAR(42) NOT NULL,
  "kind" "CreditEntryKind" NOT NULL,
  "ref" VARCHAR(128) NOT NULL,
  "amount" BIGINT NOT NULL,
  "route" TEXT,
  "detail" JSONB,
  "at" TIMESTAMPTZ(3) NOT NULL,
  "recorded_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  "published_at" TIMESTAMPTZ(3),
  CONSTRAINT "credit_entries_pkey" PRIMARY KEY ("id"),
  CONSTRAINT "credit_entries_amount_check" CHECK ("amount" >= 0)
);
CREATE UNIQUE INDEX "credit_entries_wallet_kind_ref_key" ON "credit_entries"("wallet", "kind", "ref");
CREATE INDEX "credit_entries_wallet_id_idx" ON "credit_entries"("wallet", "id");
-- the adjustments the gateways have not been sent yet
CREATE INDEX "credit_entries_unpublished_idx" ON "credit_entries"("id")
  WHERE "published_at" IS NULL AND "kind" IN ('topup', 'release', 'refund');

CREATE TABLE "credit_holds" (
  "wallet" VARCHAR(42) NOT NULL,
  "id" VARCHAR(128) NOT NULL,
  "amount" BIGINT,
  "state" VARCHAR(10) NOT NULL,
  "kept" BIGINT,
  "usage" JSONB,
  "opened_at" TIMESTAMPTZ(3),
  "reported_at" TIMESTAMPTZ(3),
  "resolved_at" TIMESTAMPTZ(3),
  "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT "credit_holds_pkey" PRIMARY KEY ("wallet", "id")
);
-- the sweep of holds (and early reports) that waited too long
CREATE INDEX "credit_holds_waiting_idx" ON "credit_holds"("created_at") WHERE "state" IN ('open', 'reported');

CREATE TABLE "credit_topups" (
  "wallet" VARCHAR(42) NOT NULL,
  "nonce" CHAR(66) NOT NULL,
  "amount" BIGINT NOT NULL,
  "state" VARCHAR(10) NOT NULL DEFAULT 'pending',
  "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  "credited_at" TIMESTAMPTZ(3),
  CONSTRAINT "credit_topups_pkey" PRIMARY KEY ("wallet", "nonce")
);
CREATE INDEX "credit_topups_pending_idx" ON "credit_topups"("created_at") WHERE "state" = 'pending';

CREATE TABLE "credit_withdrawals" (
  "id" VARCHAR(128) NOT NULL,
  "wallet" VARCHAR(42) NOT NULL,
  "amount" BIGINT NOT NULL,
  "state" VARCHAR(10) NOT NULL,
  "tx_hash" CHAR(66),
  "raw_tx" TEXT,
  "status" INTEGER,
  "error" TEXT,
  "lease_until" TIMESTAMPTZ(3),
  "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  "ended_at" TIMESTAMPTZ(3),
  CONSTRAINT "credit_withdrawals_pkey" PRIMARY KEY ("wallet", "id")
);
CREATE INDEX "credit_withdrawals_sending_idx" ON "credit_withdrawals"("lease_until") WHERE "state" IN ('pending', 'sending');
-- the daily cap sums the day's withdrawals
CREATE INDEX "credit_withdrawals_created_at_idx" ON "credit_withdrawals"("created_at");
