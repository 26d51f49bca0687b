#!/usr/bin/perl

# A corrupt state file never stops a cold start: each bad line (garbage,
# bytes that are not UTF-8, huge numbers, bad addresses, a very long line,
# a last line cut without its newline, an expiry past what DNS allows) is an
# [error] naming its line and is ignored on its own; good lines still serve
# with DNS silent; a name left without entries is resolved as usual.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(11);
my $p = port(8081);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    resolver_timeout 1s;

    upstream app {
        zone z 64k;
        state %%TESTDIR%%/app.state;
        server app.test:%%PORT_8081%% resolve;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://app; }
    }
}

EOF

$t->write_file('dns.txt', "app.test SILENT\n");
$t->dns(port(8053));
$t->backend($p);
$t->backend($p, addr => '127.0.0.2');

sub addr_of { backend_addr('/x') }

sub becomes {
	my ($want) = @_;
	return poll_until(sub { addr_of() eq $want });
}

my $later = int(time() * 1000) + 3600_000;
my $good = "app.test - 127.0.0.2:$p 1 0 $later\n";

# Good lines among bad ones, DNS silent: the good one serves.
$t->write_file('app.state', join('',
	"# sluice state\n",
	"\x00\x01\xff\xfe garbage \xc3\x28\n",
	"app.test - 127.0.0.3:$p 99999999999999999999 0 $later\n",
	"app.test - 127.0.0.3:$p 1 0 99999999999999999999999\n",
	$good,
	"app.test - 300.1.1.1:$p 1 0 $later\n",
	"app.test - 0.0.0.0:$p 1 0 $later\n",
	'app.test' x 1000 . " - 127.0.0.3:$p 1 0 $later\n",
	"app.test - 127.0.0.3:$p 1 0 18446744073709551615\n",
	"app.test - 127.0.0.3:8"));
$t->run();
is(addr_of(), '127.0.0.2', 'good line among bad ones: served with DNS silent');
my $log = $t->read_file('error.log');
my @bad = $log =~ /\[error\] .*invalid state file ".*app\.state" at line (\d+), ignored/g;
is("@bad", '2 3 4 6 7', 'the first five bad lines logged with their numbers');
like($log, qr/\[error\] .*invalid state file ".*app\.state": 3 more bad lines ignored/,
	'and how many more');
like(http_get('/x'), qr/^HTTP\/1\.1 200/, 'master and workers alive');

# A file cut in its last line: the whole lines serve.
$t->stop();
$t->write_file('app.state', $good . "app.test - 127.0.0.3:8");
$t->run();
ok($t->waitforlog(qr/invalid state file ".*app\.state" at line 2, ignored/, 3),
	'cut last line: [error] at line 2');
my %seen;
$seen{addr_of()}++ for 1 .. 6;
is(join(' ', sort keys %seen), '127.0.0.2', 'cut last line: only the whole line serves');

# Only garbage (random bytes) and DNS answering: resolved as usual.
$t->stop();
srand(7);
$t->write_file('app.state', join('', map { chr(int(rand(256))) } 1 .. 8192));
$t->write_file('dns.txt', "app.test A 127.0.0.1 30\n");
$t->run();
ok(becomes('127.0.0.1'), 'random bytes: the name is resolved as usual');
ok($t->waitforlog(qr/invalid state file ".*app\.state" at line 1, ignored/, 3),
	'random bytes: [error]');

# An expiry past u64 arithmetic: refused, resolved as usual.
$t->stop();
$t->write_file('app.state', "app.test - 127.0.0.2:$p 1 0 18446744073709551615\n");
$t->run();
ok(becomes('127.0.0.1'), 'huge expiry: refused, the name is resolved as usual');
like($t->read_file('error.log'), qr/invalid state file ".*app\.state" at line 1, ignored(?!.*\n.*panicked)/,
	'huge expiry: [error]');
unlike($t->read_file('stderr.log'), qr/panicked/, 'no panic');
