#!/usr/bin/perl

# state FILE: resolved peers kept for a cold start. The file follows the
# answers; a restart with DNS silent serves from it at once; an expired entry
# is used and looked up again at once; a corrupt file is an [error] and
# ignored.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(8);
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

$t->write_file('dns.txt', "app.test A 127.0.0.2 30\n");
$t->dns(port(8053));
$t->backend($p);
$t->backend($p, addr => '127.0.0.2');
$t->run();

sub addr_of { backend_addr('/x') }

sub becomes {
	my ($want) = @_;
	return poll_until(sub { addr_of() eq $want });
}

ok(becomes('127.0.0.2'), 'resolved');
my $state = '';
for (1 .. 20) {
	$state = $t->read_file('app.state');
	last if $state =~ /127\.0\.0\.2/;
	sleep 0.1;
}
like($state, qr/^app\.test - 127\.0\.0\.2:$p 1 0 \d{13}$/m, 'the state file has the peer');

# A cold start with DNS silent: served from the state file at once.
$t->stop();
$t->write_file('dns.txt', "app.test SILENT\n");
$t->run();
my $start = time();
is(addr_of(), '127.0.0.2', 'cold start with DNS silent: the peer from the state file');
ok(time() - $start < 0.5, 'at once');

# An expired entry is used, and looked up again at once.
$t->stop();
$t->write_file('app.state', "app.test - 127.0.0.2:$p 1 0 1000\n");
$t->write_file('dns.txt', "app.test A 127.0.0.1 30\n");
my $before = () = $t->read_file('dns.log') =~ /^app\.test A/mg;
$t->run();
isnt(addr_of(), 'down', 'expired entry: still used');
ok(becomes('127.0.0.1'), 'and looked up again at once');

# A corrupt file: an [error], ignored, no crash.
$t->stop();
$t->write_file('app.state', "this is not a state file\n");
$t->write_file('dns.txt', "app.test SILENT\n");
$t->run();
ok($t->waitforlog(qr/\[error\].*invalid state file ".*app\.state" at line 1, ignored/, 3),
	'corrupt state file: [error]');
is(addr_of(), 'down', 'and ignored (no peers, DNS silent: 502)');
