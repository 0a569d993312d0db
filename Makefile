# Shortcuts for the scripts in scripts/; see README.md and docs/operations.md.
.PHONY: run test format services-start services-stop services-status reset

run:  ## install into .venv if needed, start the product with demo data
	./scripts/run

test:  ## every check (ruff, mypy, pytest); pytest arguments via ARGS="-k name"
	./scripts/test $(ARGS)

format:  ## apply ruff's fixes and formatting
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

services-start:  ## start the embedded PostgreSQL and Redis (prints their URLs)
	.venv/bin/python -m governance.embedded start

services-stop:  ## stop the embedded PostgreSQL and Redis
	.venv/bin/python -m governance.embedded stop

services-status:
	.venv/bin/python -m governance.embedded status

reset: services-stop  ## delete all local data (database, Redis, beat schedule)
	rm -rf "$${DATA_DIR:-var}"
