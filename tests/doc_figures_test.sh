#!/usr/bin/env bash
# scripts/doc-figures on a page of its own: a stated figure that differs from what meshcast gives
# fails the check and names the command that rewrites it; --update rewrites exactly the figure;
# a marker without its end fails too (docs/examples.md#simulated-figures).
# Usage: doc_figures_test.sh path/to/meshcast path/to/scripts/doc-figures
set -u
MESHCAST=$1
FIGURES=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

page=$TMP/page.md
cat > "$page" <<'PAGE'
# A page

<!-- figures-source p7: meshcast plan --paper-case 7 --json -->

Case 7's lower bound is <!-- figures: value p7 '{lower_bound_s:.3f} s' -->9.999 s<!-- /figures -->.

<!-- figures: rows p7:ops kind=broadcast head='| op | receivers |' '| {id} | {len(receivers)} |' -->
<!-- /figures -->
PAGE

out=$(/usr/bin/python3 "$FIGURES" --meshcast "$MESHCAST" "$page" 2>&1)
status=$?
[ $status -eq 1 ] || fail "a wrong figure: exit $status, expected 1"
grep -q -- '-9.999 s' <<<"$out" || fail "the diff does not show the stated figure: $out"
grep -q -- '+1.718 s' <<<"$out" || fail "the diff does not show the figure meshcast gives: $out"
grep -q -- '--update' <<<"$out" || fail "the failure does not name --update: $out"

/usr/bin/python3 "$FIGURES" --meshcast "$MESHCAST" --update "$page" >/dev/null 2>&1 ||
  fail "--update exited $?"
grep -qF "Case 7's lower bound is <!-- figures: value p7 '{lower_bound_s:.3f} s' -->1.718 s<!-- /figures -->." "$page" ||
  fail "--update did not rewrite the figure: $(cat "$page")"
grep -qxF '| 0 | 8 |' "$page" || fail "--update did not write the table: $(cat "$page")"
out=$(/usr/bin/python3 "$FIGURES" --meshcast "$MESHCAST" "$page" 2>&1) ||
  fail "the updated page does not pass: $out"

printf 'x <!-- figures: value p7 '"'"'{ratio}'"'"' -->1\n' >> "$page"
out=$(/usr/bin/python3 "$FIGURES" --meshcast "$MESHCAST" --update "$page" 2>&1)
status=$?
[ $status -eq 1 ] || fail "a marker without its end: exit $status, expected 1"
grep -q 'no `<!-- /figures -->`' <<<"$out" || fail "a marker without its end is not named: $out"

[ $failures -eq 0 ] && echo "doc_figures_test: all passed"
exit $((failures > 0))
