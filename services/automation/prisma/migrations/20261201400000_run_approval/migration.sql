-- A run whose swap waits for a person's approval (issue 25): its status, and the approval it waits for.
ALTER TYPE "RunStatus" ADD VALUE 'awaiting_approval';
ALTER TABLE "automation_runs" ADD COLUMN "approval_id" VARCHAR(64);
ALTER TABLE "automation_runs" ADD COLUMN "approval_expires_at" TIMESTAMPTZ(3);
