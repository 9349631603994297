-- AlterTable
ALTER TABLE "jobs" ADD COLUMN     "key_id" TEXT,
ADD COLUMN     "wallet" VARCHAR(42),
ADD COLUMN     "enqueued_at" TIMESTAMPTZ(3),
ADD COLUMN     "attempts" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "worker_id" TEXT,
ADD COLUMN     "lease_until" TIMESTAMPTZ(3),
ADD COLUMN     "event_seq" INTEGER NOT NULL DEFAULT 0;

-- CreateTable
CREATE TABLE "job_events" (
    "job_id" TEXT NOT NULL,
    "seq" INTEGER NOT NULL,
    "type" VARCHAR(16) NOT NULL,
    "data" JSONB NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "job_events_pkey" PRIMARY KEY ("job_id","seq")
);

-- CreateTable
CREATE TABLE "job_steps" (
    "job_id" TEXT NOT NULL,
    "step" INTEGER NOT NULL,
    "tool" VARCHAR(64) NOT NULL,
    "input" JSONB NOT NULL,
    "output" JSONB,
    "error" TEXT,
    "started_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finished_at" TIMESTAMPTZ(3),

    CONSTRAINT "job_steps_pkey" PRIMARY KEY ("job_id","step")
);

-- CreateIndex
CREATE INDEX "jobs_key_id_created_at_idx" ON "jobs"("key_id", "created_at");

-- AddForeignKey
ALTER TABLE "job_events" ADD CONSTRAINT "job_events_job_id_fkey" FOREIGN KEY ("job_id") REFERENCES "jobs"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "job_steps" ADD CONSTRAINT "job_steps_job_id_fkey" FOREIGN KEY ("job_id") REFERENCES "jobs"("id") ON DELETE CASCADE ON UPDATE CASCADE;
