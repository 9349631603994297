-- Who may decide an approval besides admin keys, as the spend policy said when the swap was held:
-- the keys it names as approvers, and whether the key that asked may approve its own swap.
-- Approvals held before this have neither: only admin keys (and, for a payer, keys bound to its wallet) approve them.
ALTER TABLE "approvals" ADD COLUMN "approvers" VARCHAR(64)[] NOT NULL DEFAULT ARRAY[]::VARCHAR(64)[],
ADD COLUMN "self_approve" BOOLEAN NOT NULL DEFAULT false,
-- a paid agent job's payment deadline, when it came before APPROVAL_TTL_MS: expires_at is this
ADD COLUMN "payment_deadline" TIMESTAMPTZ(3);

-- GET /approvals of an approver key
CREATE INDEX "approvals_approvers_idx" ON "approvals" USING GIN ("approvers");
