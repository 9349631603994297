-- /v1 chat completions: the model asked for and the conversation's instructions
ALTER TABLE "jobs" ADD COLUMN "model" VARCHAR(64),
ADD COLUMN "instructions" TEXT;
