-- AlterTable
ALTER TABLE "api_keys" ADD COLUMN "spend_policy" JSONB;
