-- AlterTable: a paid job's payment's validBefore (unix seconds), from the gateway (x-ats-payment-valid-before):
-- the job is not started or resumed once too little of it is left to settle the payment after the job
ALTER TABLE "jobs" ADD COLUMN "payment_valid_before" BIGINT;
