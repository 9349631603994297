-- A run not made because the server wallet was paused (issue 22): neither a run nor a failure.
ALTER TYPE "RunStatus" ADD VALUE 'skipped';
