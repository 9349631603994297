-- AlterTable
ALTER TABLE "api_keys" ADD COLUMN     "wallet" VARCHAR(42);

-- CreateTable
CREATE TABLE "agent_payers" (
    "address" VARCHAR(42) NOT NULL,
    "label" VARCHAR(64) NOT NULL,
    "spend_policy" JSONB NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "agent_payers_pkey" PRIMARY KEY ("address")
);
