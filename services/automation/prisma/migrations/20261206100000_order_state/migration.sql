-- what an order has seen so far (a stop order's last price and, trailing, its highest; a TWAP's
-- slices done, amount filled and carried), and what set each run off (a trigger's price and level,
-- or a TWAP's slice)
ALTER TABLE "automations" ADD COLUMN "state" JSONB;
ALTER TABLE "automation_runs" ADD COLUMN "trigger" JSONB;
