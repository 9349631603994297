-- A settlement transaction carries a batch of payments: its signed bytes are kept once, not on
-- every payment of the batch (a batch of 100 transfers is ~70 kB of hex; on each row that was
-- 7 MB written per batch, under the wallet's lock). Payments reference it by tx_hash.
CREATE TABLE "settlement_transactions" (
    "hash" CHAR(66) NOT NULL,
    "raw_tx" TEXT NOT NULL,
    "signed_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "settlement_transactions_pkey" PRIMARY KEY ("hash")
);

-- the payments of a kept transaction, found by its hash (resuming a batch, pruning kept transactions)
CREATE INDEX "payments_tx_hash_idx" ON "payments"("tx_hash");
