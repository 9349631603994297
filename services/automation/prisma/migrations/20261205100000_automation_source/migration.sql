-- whose tokens an automation spends: the server wallet's ('server'), or its wallet's own under the
-- grant that wallet made on chain ('wallet')
ALTER TABLE "automations" ADD COLUMN "source" VARCHAR(16) NOT NULL DEFAULT 'server';
