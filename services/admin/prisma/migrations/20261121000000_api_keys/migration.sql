-- CreateEnum
CREATE TYPE "KeyTier" AS ENUM ('readonly', 'readwrite', 'admin');

-- CreateTable
CREATE TABLE "api_keys" (
    "id" TEXT NOT NULL,
    "tier" "KeyTier" NOT NULL,
    "label" VARCHAR(64) NOT NULL,
    "prefix" VARCHAR(16) NOT NULL,
    "hash" CHAR(64) NOT NULL,
    "bootstrap" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "revoked_at" TIMESTAMPTZ(3),

    CONSTRAINT "api_keys_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "api_keys_hash_key" ON "api_keys"("hash");

-- CreateIndex
CREATE INDEX "api_keys_revoked_at_idx" ON "api_keys"("revoked_at");
