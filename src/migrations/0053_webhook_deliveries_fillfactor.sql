-- Room on each new page of webhook_deliveries for every row's one update with its attempt's result
-- (issue 34). At fillfactor 60 (0046) a page held about 26 new delivery rows and the free 40 % took
-- the updated versions of about 14 of them: the rows of one page are claimed and recorded together,
-- in one statement, which cannot prune the versions it replaces, so about half of those updates left
-- the page (not HOT: a new entry in each of the table's indexes). At 40 a page holds about 17 rows and
-- has room for all their updated versions when the answer's excerpt is short. Pages written before
-- keep their fill.
ALTER TABLE webhook_deliveries SET (fillfactor = 40);
