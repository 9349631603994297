-- swaps from a user's own wallet under its on-chain grant (TradeGrants): the grant used; the
-- wallet is the recipient. They spend the user's tokens, so they count against no server-wallet cap.
ALTER TABLE "executions" ADD COLUMN "grant_id" CHAR(66);
