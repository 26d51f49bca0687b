#!/usr/bin/perl

# scripts/release's training run (the middle step of the profile-guided
# release build that scripts/bench measures and scripts/install --build
# installs), with the binary under test: `scripts/release --check BINARY`
# runs the training's configuration and clients with a tenth of their
# requests, and every part must succeed (HTTP/1.1 through the proxy, a
# zone, an access log, bodies, HTTP/1.0, static files, a 404, a redirect,
# h2c, the stream proxy, TLS when openssl is here). A change that breaks
# the training (a directive renamed, a client refused) is found here rather
# than by the release build. The argument checks are tested too.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

plan(skip_all => 'no curl') unless grep { -x "$_/curl" } split /:/, $ENV{PATH};

plan(tests => 5);

my $bin = Test::Sluice::binary();

my $out = `../scripts/release --check $bin 2>&1`;
is($?, 0, 'scripts/release --check: the training run succeeds') or diag($out);
like($out, qr/training run: every part succeeded/, '... and says so');
unlike($out, qr/\[(emerg|alert|crit)\]/, '... with no emerg, alert or crit line');

$out = `../scripts/release --check /nonexistent/sluice 2>&1`;
is($? >> 8, 2, 'scripts/release --check with no binary: exit 2');

$out = `../scripts/release --bogus 2>&1`;
like($out, qr/usage: scripts\/release/, 'an unknown argument: the usage');
