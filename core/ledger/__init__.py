"""The cost ledger, one row per pod: rows.py (a row and its sane values), months.py, csvfile.py (the CSV
text), book.py (rows and index in one transaction), store.py (the files, locked: `Ledger`), intake.py (the
watchdog's records taken in), summary.py (a month in figures)."""
