#!/usr/bin/perl

# Stream upstreams on the shared upstream layer: SRV (service=) peers, kept
# in a state file, serve a cold start with DNS silent, and are carried over
# a binary upgrade.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream upstream_zone/)->plan(6);
my $d = $t->testdir();
my $p = port(8081);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    upstream app {
        zone zs 64k;
        state %%TESTDIR%%/stream.state;
        server srv.test service=http resolve;
    }
    server { listen 127.0.0.1:%%PORT_8080%%; proxy_pass app; }
}

EOF

$t->write_file('dns.txt', "_http._tcp.srv.test SRV 10 1 $p a.test 30\na.test A 127.0.0.2 30\n");
$t->dns(port(8053));
$t->backend($p, addr => '127.0.0.2', close => 1);
$t->run();

ok(poll_until(sub { backend_addr('/x') eq '127.0.0.2' }), 'SRV peers for a stream upstream');
ok(poll_until(sub { ($t->read_file('stream.state') // '') =~ /^srv\.test http 127\.0\.0\.2:$p 1 0 \d+$/m }),
	'written to the state file');

# Cold start, DNS silent.
$t->stop();
$t->write_file('dns.txt', "_http._tcp.srv.test SILENT\na.test SILENT\n");
$t->run();
is(backend_addr('/x'), '127.0.0.2', 'cold start with DNS silent: served from the state file');

# Binary upgrade: the new binary serves the carried peers.
my $old = $t->master();
kill 'USR2', $old;
ok(poll_until(sub { my $n = -e "$d/sluice.pid" ? $t->read_file('sluice.pid') : ''; chomp $n;
	$n ne '' && $n ne $old }), 'upgraded');
my $new = $t->read_file('sluice.pid');
chomp $new;
kill 'QUIT', $old;
ok($t->wait_exit(10), 'old master gone');
is(backend_addr('/x'), '127.0.0.2', 'the new binary serves the carried stream peers');
kill 'QUIT', $new;
poll_until(sub { !kill 0, $new });
