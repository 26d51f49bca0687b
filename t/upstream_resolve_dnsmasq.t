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

sub addr_of {
	my $r = http_get('/x');
	return 'down' if $r =~ /^HTTP\/1.1 502/;
	my ($a) = $r =~ /^X-Addr: (\S+)/mi;
	return $r =~ /^HTTP\/1.1 200/ ? ($a // '127.0.0.1') : 'error';
}

sub becomes {
	my ($want) = @_;
	for (1 .. 60) {
		return 1 if addr_of() eq $want;
		sleep 0.1;
	}
	return 0;
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
