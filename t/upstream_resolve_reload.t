#!/usr/bin/perl

# Reload with resolve servers (nginx's preresolve): the new generation's zone
# starts with the peers the old one resolved, with the new line's port, and
# keeps the old answer's expiry, so it serves at once even while DNS does
# not answer, and asks DNS only when the old answer expires.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(6);

my $conf = <<'EOF';

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;

    upstream app { zone z 64k; server app.test:%%PORT_PORT%% resolve; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://app; }
    }
}

EOF

sub config {
	my ($port) = @_;
	(my $c = $conf) =~ s/%%PORT_PORT%%/%%PORT_$port%%/;
	$t->write_file_expand('sluice.conf', $c);
}

config(8081);
$t->write_file('dns.txt', "app.test A 127.0.0.2 30\n");
$t->dns(port(8053));
$t->backend(port(8081), addr => '127.0.0.2');
$t->backend(port(8082), addr => '127.0.0.2');
$t->run();

# Reloads and waits until only new workers are left.
sub reload_fully {
	my @old = $t->worker_pids();
	$t->reload() or return 0;
	for (1 .. 100) {
		my %now = map { $_ => 1 } $t->worker_pids();
		return 1 if !grep { $now{$_} } @old;
		sleep 0.05;
	}
	return 0;
}

sub answer {
	my $r = http_get('/x');
	return 'down' if $r =~ /^HTTP\/1.1 502/;
	my ($p) = $r =~ /^X-Port: (\d+)/mi;
	return $p // 'error';
}

my $first = 'none';
for (1 .. 50) {
	$first = answer();
	last if $first eq port(8081);
	sleep 0.1;
}
is($first, port(8081), 'resolved before the reload');

# DNS goes silent; the new generation must not start empty.
$t->write_file('dns.txt', "app.test SILENT\n");
my $asked = () = $t->read_file('dns.log') =~ /^app\.test A/mg;
ok(reload_fully(), 'reloaded, old workers gone');
my %got;
$got{answer()}++ for 1 .. 20;
is(join(',', keys %got), port(8081), 'the new generation serves the carried peer at once');
my $now = () = $t->read_file('dns.log') =~ /^app\.test A/mg;
is($now, $asked, 'and does not ask DNS before the old answer expires');

# A reload that changes the line's port, DNS failing: the carried address,
# the new port.
$t->write_file('dns.txt', "app.test RCODE 2\n");
config(8082);
ok(reload_fully(), 'reloaded with another port');
%got = ();
$got{answer()}++ for 1 .. 10;
is(join(',', keys %got), port(8082), 'carried peers take the new line\'s port');
