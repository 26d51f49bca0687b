#!/usr/bin/perl

# Stream upstreams share the upstream layer: `resolve` in a stream zone
# follows DNS, and a reload carries the resolved peers over (DNS silent, the
# new workers serve at once), as for HTTP.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream upstream_zone/)->plan(4);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

stream {
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    upstream app { zone zs 64k; server app.test:%%PORT_8081%% resolve; }
    server { listen 127.0.0.1:%%PORT_8080%%; proxy_pass app; }
}

EOF

$t->write_file('dns.txt', "app.test A 127.0.0.2 30\n");
$t->dns(port(8053));
$t->backend(port(8081), addr => '127.0.0.2', close => 1);
$t->run();

ok(poll_until(sub { backend_addr('/x') eq '127.0.0.2' }), 'a stream upstream follows DNS');

$t->write_file('dns.txt', "app.test SILENT\n");
my $asked = () = $t->read_file('dns.log') =~ /^app\.test A/mg;
my @old = $t->worker_pids();
$t->reload();
ok(poll_until(sub { my %now = map { $_ => 1 } $t->worker_pids(); !grep { $now{$_} } @old }),
	'reloaded, old workers gone');
my $ok = 0;
$ok++ for grep { backend_addr('/x') eq '127.0.0.2' } 1 .. 10;
is($ok, 10, 'the new workers serve the carried peers with DNS silent');
my $now = () = $t->read_file('dns.log') =~ /^app\.test A/mg;
is($now, $asked, 'without asking DNS');
