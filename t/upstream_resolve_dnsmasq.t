#!/usr/bin/perl

# server NAME resolve against a real DNS server: dnsmasq answers from a hosts
# file the test changes (and HUPs dnsmasq to re-read); two workers follow it.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%% valid=1s;

    upstream app { zone z 64k; server real.test:%%PORT_8081%% resolve; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://app; }
    }
}

EOF

$t->write_file('hosts', "127.0.0.1 real.test\n");
my $dnsmasq = $t->dnsmasq(port(8053))
	or plan(skip_all => 'dnsmasq (Debian dnsmasq-base) is not installed');
$t->plan(5);
$t->backend(port(8081));
$t->backend(port(8081), addr => '127.0.0.2');
$t->run();

sub addr_of { backend_addr('/x') }

sub becomes {
	my ($want) = @_;
	return poll_until(sub { addr_of() eq $want });
}

sub hosts {
	my ($text) = @_;
	$t->write_file('hosts', $text);
	kill 'HUP', $dnsmasq;
}

ok(becomes('127.0.0.1'), 'dnsmasq answer followed');
hosts("127.0.0.2 real.test\n");
ok(becomes('127.0.0.2'), 'the name moved: the peer followed');
hosts("");
ok(becomes('down'), 'the name removed: NXDOMAIN, 502');
ok($t->waitforlog(qr/real\.test could not be resolved \(3: Host not found\)/, 2), 'logged');
hosts("127.0.0.1 real.test\n");
ok(becomes('127.0.0.1'), 'and back');
