-- The signed settlement transaction, kept before its broadcast (H2, issue 22)
ALTER TABLE "payments" ADD COLUMN "raw_tx" TEXT;
