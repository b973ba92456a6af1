#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt uses (the first deb.debian.org-style URI of its
# sources, the security archive aside), or deb.debian.org: where debootstrap fetches a root from
# (scripts/bare_root_test.sh, scripts/make_image.sh).
mirror=$(grep -h -E '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
             /etc/apt/sources.list.d/*.list 2> /dev/null |
         grep -o 'http[^ ]*debian/\?' | grep -v security | head -1 || true)
echo "${mirror:-http://deb.debian.org/debian}"
