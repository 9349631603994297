-- AlterEnum: a job whose swap waits for a person's decision (a spend policy's approvalAboveUsd)
ALTER TYPE "JobStatus" ADD VALUE 'awaiting_approval' AFTER 'running';

-- AlterTable: the approval a waiting job shows (GET /agent/job/:id, /v1), kept until it runs on
ALTER TABLE "jobs" ADD COLUMN "approval" JSONB,
ADD COLUMN "approval_notice" TEXT;
