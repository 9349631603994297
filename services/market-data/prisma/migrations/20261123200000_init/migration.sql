-- CreateTable
CREATE TABLE "price_samples" (
    "asset" VARCHAR(64) NOT NULL,
    "bucket" TIMESTAMPTZ(3) NOT NULL,
    "price" DOUBLE PRECISION NOT NULL,

    CONSTRAINT "price_samples_pkey" PRIMARY KEY ("asset","bucket")
);

-- CreateTable
CREATE TABLE "swap_events" (
    "chain_id" INTEGER NOT NULL,
    "block_number" BIGINT NOT NULL,
    "log_index" INTEGER NOT NULL,
    "pool" VARCHAR(42) NOT NULL,
    "tx_hash" CHAR(66) NOT NULL,
    "amount0" DECIMAL(78,0) NOT NULL,
    "amount1" DECIMAL(78,0) NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "swap_events_pkey" PRIMARY KEY ("chain_id","block_number","log_index")
);

-- CreateTable
CREATE TABLE "index_cursors" (
    "name" VARCHAR(64) NOT NULL,
    "next_block" BIGINT NOT NULL,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "index_cursors_pkey" PRIMARY KEY ("name")
);

-- CreateTable
CREATE TABLE "prediction_markets" (
    "condition_id" CHAR(66) NOT NULL,
    "question" TEXT NOT NULL,
    "slug" TEXT NOT NULL,
    "description" TEXT NOT NULL,
    "outcomes" JSONB NOT NULL,
    "volume" DOUBLE PRECISION NOT NULL,
    "liquidity" DOUBLE PRECISION NOT NULL,
    "end_date" TIMESTAMPTZ(3),
    "active" BOOLEAN NOT NULL,
    "closed" BOOLEAN NOT NULL,
    "url" TEXT NOT NULL,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "prediction_markets_pkey" PRIMARY KEY ("condition_id")
);

-- CreateIndex
CREATE INDEX "swap_events_pool_at_idx" ON "swap_events"("pool", "at");

-- CreateIndex
CREATE INDEX "prediction_markets_volume_idx" ON "prediction_markets"("volume" DESC);

-- Full-text search over the catalog (by hand: Prisma cannot declare a generated tsvector).
-- The question weighs more than the description; 'english' stems "elections" to "elect".
ALTER TABLE "prediction_markets" ADD COLUMN "search" tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', "question"), 'A') || setweight(to_tsvector('english', "description"), 'B')
) STORED;
CREATE INDEX "prediction_markets_search_idx" ON "prediction_markets" USING GIN ("search");
